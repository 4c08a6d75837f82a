"""Registration of the backends that live in their own modules (torch, moderngl).

Each module exposes ``register()``; importing it must not import its optional dependency.
"""

from importlib import import_module

for _module in ("torch_backend", "moderngl"):
    try:
        _mod = import_module(f"{__package__}.{_module}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"{__package__}.{_module}":
            raise
        continue
    _mod.register()
