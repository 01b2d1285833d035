"""Who people are: resource groups (teams), memberships and roles, API tokens, the audit log."""
