for _ in range(10):
    o = naive(q, k, v)
torch.cuda.synchronize()
