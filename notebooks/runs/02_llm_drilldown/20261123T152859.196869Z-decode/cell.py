torch.set_grad_enabled(False)
logits, caches = model(prompt)
tok = logits[:, -1:].argmax(-1)
for step in range(NEW):
    logits, caches = model(tok, caches)
    tok = logits[:, -1:].argmax(-1)
