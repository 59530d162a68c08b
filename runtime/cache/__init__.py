"""KV memory: request-to-token and token-to-KV pools, the radix prefix cache and its no-cache twin."""
