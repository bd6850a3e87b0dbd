"""The Faust worker: one generic agent per saga or participant, deadlines, dead letters."""
