for _ in range(10):
    out = naive_attention(q, k, v)
