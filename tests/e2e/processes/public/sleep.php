<?php
// Sleeps ?ms= milliseconds (0 by default) and names the process that ran it.
usleep((int) ($_GET['ms'] ?? 0) * 1000);
echo "pid=" . getmypid();
