<?php
usleep((int) ($_GET['ms'] ?? 100) * 1000);
echo 'slept';
