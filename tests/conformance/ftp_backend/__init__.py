"""An FTP backend written from CONTRIBUTING.md alone, as a platform team would (issue 33).

``ftpstore://BUCKET/KEY`` is the file ``/BUCKET/KEY`` on one FTP server (the ``endpoint``
setting); BUCKET, a top-level folder that must exist, plays the part of a cloud's bucket. A
write is a ``STOR`` to a hidden name beside the object, committed by ``RNFR``/``RNTO``; a read is
one ``RETR`` checked against the object's ``MLST`` facts, a ranged read a ``REST`` then ``RETR``;
listings walk ``MLSD``. It lives with the tests (not shipped): ``planted.py`` holds the bugs
planted in it, which the suites must fail.
"""
