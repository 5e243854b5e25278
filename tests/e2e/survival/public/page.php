<?php
// A classic request running cached code.
require __DIR__ . '/../lib/shapes.php';
echo 'page ', shapes_checksum();
