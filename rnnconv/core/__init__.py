"""The core every layer above stands on: the one in-memory form (`canonical`), cuDNN's weight space (`weightspace`),
element types, the typed documents and settings, and cuDNN's equations in numpy (`reference`) with the inputs and
tolerances results are compared on (`compare`). It imports no format and nothing of the command line."""
