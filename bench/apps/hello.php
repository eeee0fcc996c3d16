<?php
// Case PHP of bench/run: the smallest PHP answer, "hello world" (the same pool behind nginx and hayate).
echo "hello world";
