raise RuntimeError("the refunds API token is not configured <see REFUNDS_TOKEN>")
