with torch.no_grad(), nvtx.annotate("prefill", domain="LLM"):
    with nvtx.annotate("layers", domain="LLM"):
        hidden = model.model(input_ids=prompt[:bs]).last_hidden_state
    with nvtx.annotate("head", domain="LLM"):
        logits = model.lm_head(hidden)
torch.cuda.synchronize()
