"""What grpclib leaves to the application: admission, request cardinality, per-connection
hardening, message-size limits, large bodies, strict parsing, write batching and reply budgets."""
