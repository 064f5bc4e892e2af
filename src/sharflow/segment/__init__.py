"""The segment stage (issue 75, in progress): long recordings into single-speaker segments cut at
pauses, with every second of a recording kept or dropped with a reason.

- `turns`: speech spans (Silero VAD), speaker-embedding windows, the recording's speakers
  (clustered, their number estimated), a label per stretch of speech (a speaker, overlap, none);
- `cut`: segments of one speaker between `min_segment` and `max_segment`, and the accounting;
- `recording`: the models of one rank over one recording (`Segmenter`);
- `score`: a segmentation against a truth (the long-form test corpus's, or a user's own labels).
"""
