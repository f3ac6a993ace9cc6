for _ in range(10):
    o = F.scaled_dot_product_attention(qb, kb, vb)
torch.cuda.synchronize()
