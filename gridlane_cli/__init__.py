"""The `gridlane` command: the REST API for terminal users, and `gridlane agent` for hosts. No Django."""
