// Placeholder until the engine benchmark lands (issue 2).
print("bench: not implemented yet")
