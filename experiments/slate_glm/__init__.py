"""Reproduction of "Contextual Slate GLM Bandits with Limited Adaptivity" (B-/RS-SlateGLinCB)."""
