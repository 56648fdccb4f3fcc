"""Is this text an address or a host name? The launcher checks --master-addr with it before
every job, and the rank-table rules check each server_id."""
from __future__ import annotations

import ipaddress
import socket


def _is_label(label: str) -> bool:
    """One RFC 1123 label: 1-63 ASCII letters, digits and hyphens, no hyphen first or last."""
    return (0 < len(label) <= 63 and label.isascii() and label.replace("-", "").isalnum()
            and label[0] != "-" and label[-1] != "-")


def is_ip(text: str) -> bool:
    """IPv4 or IPv6 address. inet_pton first: ipaddress alone is most of the time of checking
    a 100,000-device table."""
    try:
        socket.inet_pton(socket.AF_INET, text)
        return True
    except (OSError, ValueError):
        pass
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def is_host(text: str) -> bool:
    """An IPv4/IPv6 address or an RFC 1123 host name: what HCCL and the launcher can use as a
    server's identity (it reaches variables, folder names and tags, so nothing else passes)."""
    if text and len(text) <= 253 and all(_is_label(label)
                                         for label in text.rstrip(".").split(".")):
        return True  # (a dotted IPv4 address is a valid name too: no need to ask is_ip)
    return is_ip(text)
