"""RSA-CP reproduction: split CP vs RSA-CP coverage and width in small-sample regimes."""
