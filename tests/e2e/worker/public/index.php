<?php
echo 'classic index';
