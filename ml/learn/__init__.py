"""Training: the supervised student (``supervised``), PPO self-play (``ppo``), their DVCLive curves (``curves``)."""
