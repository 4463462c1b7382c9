"""Where shou's own network clients may go: one address policy and the egress proxy that enforces it."""

from .address import AddressRefused, Allow, check_address, is_public, refusal, resolve_checked
from .egress import EgressProxy, egress_proxy

__all__ = ["AddressRefused", "Allow", "EgressProxy", "check_address", "egress_proxy", "is_public", "refusal",
           "resolve_checked"]
