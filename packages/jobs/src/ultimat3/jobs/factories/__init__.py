"""The factories: one module each, every one a thin function over ``job()``.

This ``__init__`` imports none of them; ``from ultimat3.jobs import webhook`` loads one lazily.
"""
