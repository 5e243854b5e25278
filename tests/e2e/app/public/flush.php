<?php
echo "first\n";
flush();
usleep((int) ($_GET['ms'] ?? 1500) * 1000);
echo "second\n";
