"""The cluster spec: pydantic model, cross-field rules, YAML loading, error translation."""
