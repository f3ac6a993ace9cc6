batches = torch.utils.data.DataLoader(NoisyTokens(), batch_size=32, num_workers=2)
for i, (xb, yb) in enumerate(batches):
    loss = loss_fn(small(xb.cuda()), yb.cuda())
    loss.backward()
    small_opt.step()
    small_opt.zero_grad(set_to_none=True)
    if i == 7:
        break
torch.cuda.synchronize()
