"""Reverse-mode AD over egad's IR (IR -> IR); arrives with the AD issue (DESIGN §4)."""
