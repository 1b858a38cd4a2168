"""The backend kit: what every cloud backend needs and writes the same way."""
