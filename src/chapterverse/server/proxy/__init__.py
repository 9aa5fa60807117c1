"""The OpenAI-compatible proxy: ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/models`` in front of an
upstream model, answered with the knowledge base's passages injected (``rag_mode=inject``) or by chapterverse's
own tool loop (``rag_mode=tools``).

- :mod:`.chat_completions` and :mod:`.responses_api`: the routes;
- :mod:`.grounding`: the retrieve-inject-filter step both routes take, with :mod:`.rewrite` (what to retrieve
  with), :mod:`.injection` (the context block and the reply's verified citations) and :mod:`.replies` (the
  filtered reply in each API's format);
- :mod:`.relay`: the call to the upstream model and its SSE loop, masked by :mod:`.streammask`;
- :mod:`.tools_mode`: ``rag_mode=tools``.

The upstream model's settings (``server.upstream``) are shared with the web reader and stay beside it.
"""
