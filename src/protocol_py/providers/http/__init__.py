"""HTTP plumbing shared by the vendor adapters: the streaming base provider, SSE, bounded bodies,
error classification, base URLs and per-message translation reuse."""
