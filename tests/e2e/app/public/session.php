<?php
session_start();
$_SESSION['count'] = ($_SESSION['count'] ?? 0) + 1;
header('Content-Type: application/json');
echo json_encode(['id' => session_id(), 'count' => $_SESSION['count']]);
