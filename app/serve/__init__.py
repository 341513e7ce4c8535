"""``slabscope serve`` and ``slabscope load``: an OpenAI-compatible server on slabscope's engine, profiled live, and a
load generator that drives any OpenAI-compatible server (docs/serve.md).

Two processes per server: the HTTP front (``app.serve.front``: aiohttp, no mlx; requests, text, streaming) and the
engine worker (``app.serve.worker``: mlx; the model, the KV backend, continuous batching, the probes and the
recording). They talk through ``app.serve.protocol``'s typed messages.
"""
