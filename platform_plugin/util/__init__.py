"""Small helpers with no project knowledge: /proc readers, ports, text tables."""
