"""Glue for training frameworks (MindSpore callback, torch loop helper); imported explicitly."""
