torch.set_grad_enabled(False)
logits, caches = model(prompt)
