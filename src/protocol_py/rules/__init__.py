"""The protocol's rules, pure functions over generated messages: capability and request
validation, pricing and exact cost, stream order and accumulation, routing, and replay."""

__all__: list[str] = []
"""Nothing at the package level: import the concern's module (its own ``__all__``)."""
