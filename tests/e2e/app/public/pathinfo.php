<?php
header('Content-Type: application/json');
$keys = ['SCRIPT_NAME', 'SCRIPT_FILENAME', 'PATH_INFO', 'PATH_TRANSLATED', 'PHP_SELF', 'DOCUMENT_URI', 'REQUEST_URI'];
echo json_encode(array_intersect_key($_SERVER, array_flip($keys)), JSON_UNESCAPED_SLASHES);
