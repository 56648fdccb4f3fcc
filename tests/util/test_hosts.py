"""util/hosts: a host name's labels are checked without a regular expression (start-up time);
the rule is RFC 1123's, as the expression it replaced wrote it."""
from __future__ import annotations

import random
import re

import pytest

from platform_plugin.util.hosts import is_host

RFC_1123_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def by_the_expression(text: str) -> bool:
    return bool(text) and len(text) <= 253 and all(
        RFC_1123_LABEL.fullmatch(label) for label in text.rstrip(".").split("."))


@pytest.mark.parametrize("text, ok", [
    ("node-1", True), ("a", True), ("a" * 63, True), ("a" * 64, False), ("-a", False),
    ("a-", False), ("a_b", False), ("a b", False), ("é.example", False), ("٣", False),
    ("x.example.com.", True), ("x..y", False), ("", False), ("a\n", False),
    ("10.0.0.1", True), ("::1", True), ("fe80::1%eth0", True), ("1.2.3.256", True)])
def test_names_and_addresses(text, ok):
    assert is_host(text) == ok


def test_the_label_rule_is_the_expressions_on_random_text():
    rng = random.Random(13)
    alphabet = "aZ09-_.é٣ \n"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70)))
        if ":" not in text:  # (no IPv6 address here: both sides would ask is_ip)
            assert is_host(text) == by_the_expression(text), repr(text)
