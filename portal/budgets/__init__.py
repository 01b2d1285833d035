"""Budgets: GPU-hours and money per month (or a custom window) for a team, a member or an agent identity."""
