"""The Failure Analyst (round stage 2): failure cards, lessons, counterfactual trials, candidate skill edits.

docs/analyst.md describes the stage; `shopsimrl training analyze CONFIG` runs it and
`shopsimrl training analyze-sidecar CONFIG` writes failure cards while training runs.
Modules are imported where they are used (the trial needs torch; the llm backend needs openai).
"""
