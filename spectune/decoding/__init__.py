"""The exact runtime decoder: sampling math, combinations, KV caches, the decode loop and its stats."""
from spectune.decoding.combine import Combination, parse_combination
from spectune.decoding.loop import Decoder, SamplingParams
from spectune.decoding.stats import DecodeStats

__all__ = ["Combination", "DecodeStats", "Decoder", "SamplingParams", "parse_combination"]
