"""Pure planning: a validated spec to a printable LaunchPlan (addresses, ports, secret
masking, the plan view)."""
