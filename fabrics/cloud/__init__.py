"""Cloud providers for burst pools: launch, describe and terminate instances by tag. No Django here."""
