"""Patches of dependencies, each in its own module (see :func:`install`)."""
