"""What users submit: workloads, their state machine and events, and the services that change them."""
