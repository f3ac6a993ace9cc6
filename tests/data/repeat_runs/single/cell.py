with torch.no_grad():
    out = model(ids)
torch.cuda.synchronize()
