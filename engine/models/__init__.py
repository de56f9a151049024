"""Where models come from and what they need: sources, loading, weight files, consent, the hub, the token,
the catalog (listing, memory estimates, draft/target pairing)."""
