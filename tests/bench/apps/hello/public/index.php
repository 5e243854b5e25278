<?php
// Hello world; ?large=<MB> answers that many megabytes in one echo (see worker.php).
if (isset($_GET['large'])) {
    echo str_repeat('x', (int) $_GET['large'] << 20);
    return;
}
echo 'Hello, world!';
