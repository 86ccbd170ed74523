"""groundplan: grounded LLM planners for robots, evaluated at scale."""
__version__ = "0.1.0"
