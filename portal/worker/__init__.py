"""The background worker: scheduling cycles (snapshot -> decide -> apply), dispatch and sync, on django-q2."""
