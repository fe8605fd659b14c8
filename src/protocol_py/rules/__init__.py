"""The protocol's rules, pure functions over generated messages: capability and request
validation, pricing and exact cost, stream order and accumulation, routing, and replay."""
