"""The decode methods, one module each: a step function over :class:`spectune.decoding.state_machine.Machine`.

The registry (``spectune/decoding/registry.py``) lists them; the runtime and the simulator both run them.
"""
