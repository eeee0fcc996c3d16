<?php
// Case B of bench/run: wait 1.5 s, answer "hello world" (behind nginx -> php-fpm).
usleep(1500000);
echo "hello world";
