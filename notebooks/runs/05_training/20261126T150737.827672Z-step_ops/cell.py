with nvtx.annotate("train@fwd", domain="train"), torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(input_ids=ids, labels=ids).loss
with nvtx.annotate("train@bwd", domain="train"):
    loss.backward()
with nvtx.annotate("train@opt", domain="train"):
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
