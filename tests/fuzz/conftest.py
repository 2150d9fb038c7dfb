"""The oracle's twin tables, one set per emulator, shared by every fuzz case."""

from oracle.conftest import twins

__all__ = ["twins"]
