"""BabyAI pickup levels (SayCanPay, Sec. 6) through ``minigrid``, with high-level text actions."""
