"""Search strategies over a ConfigSpace, each a small class under one Budget."""
